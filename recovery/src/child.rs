//! Running part of a test in a child process, so that whatever that part does (panics, dies of a
//! signal, hangs) the test itself lives on to report it.
//!
//! The child is the test binary itself, re-executed to run only the calling test, with the
//! environment variable [`CHILD_ENV`] set to an argument. The test starts with [`child_arg`]:
//! in the child it returns the argument and the test runs the part in question instead of its
//! usual body. The child tells the parent what it found with [`report`], one line on standard
//! output each; the parent gets them, with how the child ended, from [`ChildTest::run`].
//!
//! ```no_run
//! # fn open_and_check(_: &str) -> String { String::new() }
//! use std::time::Duration;
//! use petra_recovery::child::{ChildTest, Exit, child_arg, report};
//!
//! #[test]
//! fn opening_a_damaged_file_never_dies() {
//!     if let Some(path) = child_arg() {
//!         report(open_and_check(&path)); // may panic, crash or hang: the parent sees it
//!         return;
//!     }
//!     let run = ChildTest::new("opening_a_damaged_file_never_dies", Duration::from_secs(30))
//!         .run("/dev/shm/damaged.pool")
//!         .unwrap();
//!     assert_eq!(run.exit, Exit::Code(0), "{}", run.describe_failure());
//!     assert_eq!(run.reports(), ["opened"]);
//! }
//! ```
//!
//! The timeout needs no polling: a thread waits for the child to end without reaping it
//! (`waitid` with `WNOWAIT`), so the parent either hears of its end within the timeout or kills
//! it, and only then reaps it; the child's pid cannot be reused by another process meanwhile.

use std::fmt;
use std::io::{self, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The environment variable that makes a re-executed test binary a child, holding its argument.
pub const CHILD_ENV: &str = "PETRA_CHILD_ARG";

/// What starts each line the child reports.
const REPORT_PREFIX: &str = "PETRA-REPORT ";

/// In a child of a [`ChildTest`], its argument; `None` in an ordinary test run.
pub fn child_arg() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// Called by the child: reports one line to the parent (line breaks in `item` are replaced by
/// ` / `, so that one call is one line).
pub fn report(item: impl fmt::Display) {
    use std::io::Write;
    let line = item.to_string().replace('\n', " / ");
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{REPORT_PREFIX}{line}");
    let _ = out.flush();
}

/// A child's one-word verdict on what it compared: `equal`, or how many differences and the
/// first five.
pub fn verdict(differences: &[String]) -> String {
    if differences.is_empty() {
        return "equal".into();
    }
    let shown: Vec<&str> = differences.iter().take(5).map(String::as_str).collect();
    format!("differs in {} places: {}", differences.len(), shown.join("; "))
}

/// An error's variant path, as a caller matches it: `Open(HeaderChecksum)`.
pub fn variant(e: &impl fmt::Debug) -> String {
    let debug = format!("{e:?}");
    let name: String = debug.chars().take_while(|c| c.is_alphanumeric() || *c == '(').collect();
    let name = name.trim_end_matches('(');
    format!("{name}{}", ")".repeat(name.matches('(').count()))
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code: 0 if the test passed in it, 101 if it panicked.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// It was still running at the timeout, and was killed.
    TimedOut(Duration),
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Exit::Code(0) => write!(f, "exited normally"),
            Exit::Code(101) => write!(f, "panicked (exit code 101)"),
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s} ({})", signal_name(s)),
            Exit::TimedOut(t) => write!(f, "hung: still running after {t:?}, killed"),
        }
    }
}

/// The usual name of signal `s`.
pub fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSYS => "SIGSYS",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "another signal",
    }
}

/// What a child did.
#[derive(Debug, Clone)]
pub struct ChildRun {
    /// How it ended.
    pub exit: Exit,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error (where a panic's message goes).
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

impl ChildRun {
    /// The lines it [`report`]ed, in order.
    pub fn reports(&self) -> Vec<&str> {
        // Found anywhere in a line: the test harness may have begun one (`test name ... `) that
        // the child's first report continues.
        self.stdout.lines().filter_map(|l| l.find(REPORT_PREFIX).map(|at| &l[at + REPORT_PREFIX.len()..])).collect()
    }

    /// The message of the panic it died of, if it panicked: the `panicked at` line and the
    /// message after it, on one line.
    pub fn panic_message(&self) -> Option<String> {
        let mut lines = self.stderr.lines().skip_while(|l| !l.contains("panicked at"));
        // From `panicked at`: the thread's name and id before it say nothing here.
        let at = lines.next()?;
        let at = &at[at.find("panicked at").expect("found above")..];
        let message: Vec<&str> =
            lines.take_while(|l| !l.starts_with("note:") && !l.starts_with("stack backtrace")).collect();
        Some(format!("{} {}", at.trim(), message.join(" / ")).trim().to_owned())
    }

    /// How it ended, with its panic message or the end of its standard error: for a failure
    /// report.
    pub fn describe_failure(&self) -> String {
        match (self.exit, self.panic_message()) {
            (Exit::Code(101), Some(m)) => format!("panicked: {m}"),
            (exit, _) => {
                let tail: Vec<&str> = self.stderr.lines().rev().take(3).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                if tail.is_empty() { exit.to_string() } else { format!("{exit}; stderr ends: {}", tail.join(" / ")) }
            }
        }
    }
}

/// A test to run in children, one per [`run`](ChildTest::run).
#[derive(Debug, Clone)]
pub struct ChildTest {
    /// The exact name of the test (as libtest names it, module path included).
    pub test_name: String,
    /// How long a child may run before it is killed and reported as hung.
    pub timeout: Duration,
    /// The address space a child may take (`RLIMIT_AS`), so that one that runs away with
    /// memory fails there rather than on the machine; `None`: no limit.
    pub address_space: Option<u64>,
    /// Extra environment variables for the child.
    pub env: Vec<(String, String)>,
}

impl ChildTest {
    /// Children of the test `test_name`, each killed after `timeout`, each limited to 16 GiB of
    /// address space.
    pub fn new(test_name: &str, timeout: Duration) -> ChildTest {
        ChildTest { test_name: test_name.to_owned(), timeout, address_space: Some(16 << 30), env: Vec::new() }
    }

    /// Runs the test in a child with `arg` and waits for it to end, or kills it at the timeout.
    /// Errors only if the child cannot be started or waited for.
    pub fn run(&self, arg: &str) -> io::Result<ChildRun> {
        let exe = std::env::current_exe()?;
        let mut command = Command::new(exe);
        command
            .args([self.test_name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, arg)
            // A panic's message is enough; a backtrace would bury it.
            .env("RUST_BACKTRACE", "0")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let address_space = self.address_space;
        // SAFETY: the closure runs in the forked child before `exec`, where only async-signal-safe
        // calls are allowed: it makes two `setrlimit` system calls on stack values and allocates
        // nothing.
        unsafe {
            command.pre_exec(move || {
                // A child that dies of a signal leaves no core file behind.
                let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                if let Some(bytes) = address_space {
                    let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
                    libc::setrlimit(libc::RLIMIT_AS, &limit);
                }
                Ok(())
            });
        }
        let start = Instant::now();
        let mut child = command.spawn()?;
        let pid = child.id();
        let stdout = drain(child.stdout.take().expect("piped"));
        let stderr = drain(child.stderr.take().expect("piped"));
        let (ended_tx, ended) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = ended_tx.send(wait_without_reaping(pid));
        });
        let timed_out = match ended.recv_timeout(self.timeout) {
            Ok(Ok(())) => false,
            Ok(Err(e)) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
            Err(_) => {
                // The child has not been reaped (the waiter does not reap), so its pid is still
                // its own: the kill cannot reach another process.
                child.kill()?;
                true
            }
        };
        let status = child.wait()?;
        let elapsed = start.elapsed();
        let _ = waiter.join();
        let exit = if timed_out {
            Exit::TimedOut(self.timeout)
        } else if let Some(s) = status.signal() {
            Exit::Signal(s)
        } else {
            Exit::Code(status.code().expect("an exit code when no signal ended the child"))
        };
        let stdout = stdout.join().map_err(|_| io::Error::other("the stdout reader panicked"))?;
        let stderr = stderr.join().map_err(|_| io::Error::other("the stderr reader panicked"))?;
        Ok(ChildRun { exit, stdout, stderr, elapsed })
    }
}

/// Reads `pipe` to its end on a thread of its own (so that a child writing much to one pipe
/// never blocks on it while the parent waits on the other).
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Blocks until child `pid` has ended, leaving it to be reaped by [`std::process::Child::wait`].
fn wait_without_reaping(pid: u32) -> io::Result<()> {
    loop {
        // SAFETY: `siginfo_t` is a plain C struct for which all zeroes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable `siginfo_t` for the call's duration; `WNOWAIT`
        // leaves the child a zombie, so the pid stays reserved for `Child::wait` to reap.
        let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "child::tests::every_way_a_child_ends_is_told_apart";

    #[test]
    fn every_way_a_child_ends_is_told_apart() {
        if let Some(arg) = child_arg() {
            report("started");
            match arg.as_str() {
                "report" => report("two\nlines"),
                "panic" => panic!("on purpose"),
                "abort" => std::process::abort(),
                "hang" => loop {
                    std::thread::park();
                },
                _ => unreachable!("no such case {arg}"),
            }
            return;
        }
        let test = ChildTest::new(NAME, Duration::from_secs(2));
        let run = test.run("report").unwrap();
        assert_eq!(run.exit, Exit::Code(0), "{}", run.describe_failure());
        assert_eq!(run.reports(), ["started", "two / lines"]);

        let run = test.run("panic").unwrap();
        assert_eq!(run.exit, Exit::Code(101));
        let message = run.panic_message().unwrap();
        assert!(message.starts_with("panicked at") && message.ends_with("on purpose"), "{message}");
        assert_eq!(run.reports(), ["started"]);

        let run = test.run("abort").unwrap();
        assert_eq!(run.exit, Exit::Signal(libc::SIGABRT));
        assert_eq!(run.exit.to_string(), "killed by signal 6 (SIGABRT)");

        let run = test.run("hang").unwrap();
        assert_eq!(run.exit, Exit::TimedOut(Duration::from_secs(2)));
        assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
        assert_eq!(run.reports(), ["started"]);
    }
}

//! The crash-recovery harness.
//!
//! - [`crash`]: runs a workload on the crash simulator ([`petra::mem::SimMem`]), takes crash
//!   images at the points a plan selects (every fence, every flush, random stores), runs the
//!   caller's recover-and-check on each, and reports how many images were checked and which failed,
//!   with what it takes to replay each failure.
//! - [`kill`]: re-executes the test binary as a child, kills it with SIGKILL at a random moment,
//!   and lets the parent reopen the pool file and check it against what the child acknowledged.

pub mod crash;
pub mod kill;

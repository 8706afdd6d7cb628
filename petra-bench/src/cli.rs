//! What the subcommands share on the command line: a progress bar and the "wrote" lines on
//! stderr (stdout keeps the results alone), a scratch directory for the files of a run, and the
//! parser and spelling of the enumerated flags' values.

use std::ffi::OsStr;
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use clap::builder::{PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use clap::{Arg, Command, ValueEnum};
use tempfile::TempDir;

use crate::error::{BenchError, Result};

/// Says on stderr which files a run wrote (stdout keeps the results alone).
pub(crate) fn wrote(files: Vec<PathBuf>) {
    for file in files {
        eprintln!("wrote {}", file.display());
    }
}

/// A progress bar of `len` steps on stderr, drawn only when stderr is a terminal.
pub(crate) fn progress_bar(len: usize, unit: &str) -> indicatif::ProgressBar {
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit}, {{elapsed}} ({{eta}} left)");
    indicatif::ProgressBar::new(len as u64)
        .with_style(indicatif::ProgressStyle::with_template(&template).expect("a valid template"))
}

/// A new scratch directory for the files of a run, removed when dropped: under /dev/shm where
/// it exists and one can be made there (a file system in memory), else in the system's
/// temporary directory.
pub(crate) fn scratch() -> Result<TempDir> {
    let mut dir = tempfile::Builder::new();
    dir.prefix("petra-");
    let shm = Path::new("/dev/shm");
    let made = if shm.is_dir() { dir.tempdir_in(shm).or_else(|_| dir.tempdir()) } else { dir.tempdir() };
    made.map_err(BenchError::ScratchDir)
}

/// A petra-kv store's durability policy, as `--durability` spells it (see
/// [`petra::DurabilityPolicy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Policy {
    /// A write survives the death of the process, not of the machine.
    Process,
    /// As `process`, and a background safe point every second (the stores' default). On a file
    /// on a disk only: in memory (`/dev/shm`) no safe points are kept, and this is `process`.
    Periodic,
    /// A write returns once it survives power loss (group commit). On a file on a disk only, as
    /// `periodic`.
    Immediate,
}

/// Says on stderr that the policy asked for keeps no safe points on `engine`'s memory (a file in
/// `/dev/shm`, where runs put their files unless told otherwise, which a power loss takes whole):
/// it runs as `process` there, and the rows that name it measure that.
pub(crate) fn note_safe_points<M: petra::mem::PMem + 'static>(engine: &petra::Engine<M>) {
    if engine.durability() != petra::DurabilityPolicy::Process && !engine.keeps_safe_points() {
        eprintln!(
            "note: durability {} keeps no safe points on a {} pool (a power loss takes it whole): it runs as process; \
             give a directory on a disk to measure it",
            engine.durability(),
            engine.pool().durability()
        );
    }
}

impl Policy {
    /// The engine's policy.
    pub(crate) fn policy(self) -> petra::DurabilityPolicy {
        match self {
            Policy::Process => petra::DurabilityPolicy::Process,
            Policy::Periodic => petra::DurabilityPolicy::Periodic(std::time::Duration::from_secs(1)),
            Policy::Immediate => petra::DurabilityPolicy::Immediate,
        }
    }
}

/// Its name in reports and on the command line.
impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        spell(self, f)
    }
}

/// The scratch directory of a run: a new one in `dir` if given (the disk to measure), else
/// [`scratch`]'s.
pub(crate) fn scratch_in(dir: Option<&Path>) -> Result<TempDir> {
    match dir {
        Some(dir) => tempfile::Builder::new().prefix("petra-").tempdir_in(dir).map_err(BenchError::ScratchDir),
        None => scratch(),
    }
}

/// Writes `value` as the command line spells it (the `Display` of an enumerated flag's values).
pub(crate) fn spell<E: ValueEnum>(value: &E, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.pad(value.to_possible_value().expect("no value of a flag is skipped").get_name())
}

/// The parser of an enumerated flag: the values of the [`ValueEnum`] `E`, taken as clap's own
/// parser takes them, and refused with a message that names what they are and lists them:
/// `unknown mode "fast": use durable, volatile, locks or skipmap`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OneOf<E> {
    what: &'static str,
    values: PhantomData<fn() -> E>,
}

/// The parser of an enumerated flag whose values are `what`s (see [`OneOf`]).
pub(crate) fn one_of<E>(what: &'static str) -> OneOf<E> {
    OneOf { what, values: PhantomData }
}

impl<E: ValueEnum + Clone + Send + Sync + 'static> TypedValueParser for OneOf<E> {
    type Value = E;

    fn parse_ref(&self, cmd: &Command, _arg: Option<&Arg>, value: &OsStr) -> Result<E, clap::Error> {
        let value = value.to_string_lossy();
        E::from_str(&value, false).map_err(|_| {
            let names: Vec<String> =
                E::value_variants().iter().filter_map(E::to_possible_value).map(|v| v.get_name().to_owned()).collect();
            let choices = match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => names.concat(),
            };
            cmd.clone().error(ErrorKind::InvalidValue, format!("unknown {} {value:?}: use {choices}", self.what))
        })
    }

    /// The values, without the variants' docs: the flag's help already says what each means,
    /// and with them clap would list one value a line in place of the short help's one line.
    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(E::value_variants().iter().filter_map(E::to_possible_value).map(|v| v.help(None))))
    }
}

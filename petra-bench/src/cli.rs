//! What the subcommands share on the command line: a progress bar and the "wrote" lines on
//! stderr (stdout keeps the results alone), and a scratch directory for the files of a run.

use std::path::PathBuf;

use crate::error::{BenchError, Result};

/// Says on stderr which files a run wrote (stdout keeps the results alone).
pub fn wrote(files: Vec<PathBuf>) {
    for file in files {
        eprintln!("wrote {}", file.display());
    }
}

/// A progress bar of `len` steps on stderr, drawn only when stderr is a terminal.
pub fn progress_bar(len: usize, unit: &str) -> indicatif::ProgressBar {
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit}, {{elapsed}} ({{eta}} left)");
    indicatif::ProgressBar::new(len as u64)
        .with_style(indicatif::ProgressStyle::with_template(&template).expect("a valid template"))
}

/// A scratch directory under /dev/shm where it exists, else the temporary directory.
pub fn scratch() -> Result<tempfile::TempDir> {
    petra_recovery::try_scratch_dir().map_err(BenchError::ScratchDir)
}

//! The command line refuses bad arguments with a message and a non-zero exit, and runs a tiny
//! configuration to the end.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_petra-bench")).args(args).output().expect("petra-bench runs")
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    for (args, says) in [
        (&["micro", "--tx-size", "17"][..], "outside 1 to 16"),
        (&["micro", "--mix", "50/40/20"], "add up to 100"),
        (&["micro", "--modes", "fast"], "unknown mode"),
        (&["micro", "--threads", "0"], "at least 1"),
        (&["micro", "--structure", "tree"], "unknown structure"),
        (&["micro", "--txs", "many"], "invalid value"),
        (&["frobnicate"], "unrecognized subcommand"),
    ] {
        let out = bench(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn a_tiny_run_prints_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "micro",
        "--threads",
        "1",
        "--tx-size",
        "2",
        "--key-range",
        "64",
        "--txs",
        "200",
        "--mix",
        "40/40/20",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.contains("durable")) && text.lines().any(|l| l.contains("volatile")), "{text}");
}

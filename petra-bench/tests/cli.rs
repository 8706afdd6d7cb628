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
        (&["kv", "--benchmarks", "fillrandom,fillfast"], "unknown benchmark \"fillfast\""),
        (&["kv", "--key_size", "4", "--num", "10"], "below 8 bytes"),
        (&["kv", "--engine", "btree"], "unknown engine"),
        (&["kv", "--threads", "0", "--num", "10"], "at least 1"),
        (&["kv", "--readwritepercent", "101", "--num", "10"], "above 100"),
        (&["kv", "--tx_size", "65", "--num", "10"], "outside 1 to 64"),
        (&["kv", "--engine", "redb-none", "--volatile", "--num", "10"], "petra-kv's mode"),
        (&["kv", "--engine", "sorted,unsorted", "--db", "/tmp/x", "--num", "10"], "give one engine"),
        (&["metrics", "--samples", "10", "--range-len", "20"], "at least that many samples"),
        (&["tatp", "--mix", "payment"], "unknown mix"),
        (&["lftt", "4", "1", "10", "1", "64", "40", "40"], "set type 4"),
        (&["lftt", "0", "1", "10", "1", "64", "60", "50"], "exceeds 100%"),
        (&["lftt", "1", "1", "10", "1", "64", "40", "30", "10"], "for the map"),
        (&["lftt", "3", "1", "10", "17", "64", "40", "30", "10"], "outside 1 to 16"),
        (&["micro", "--prefill", "most"], "give harness or a share"),
        (&["micro", "--prefill", "1.5"], "outside 0 to 1"),
        (&["overview", "--tx-size", "17"], "outside 1 to 16"),
        (&["micro", "--modes", "stm"], "unknown mode"),
        (&["tatp", "--threads", "0"], "at least 1"),
        (&["tatp", "--modes", "fast"], "unknown mode"),
        (&["reopen", "--structure", "list"], "unknown structure"),
        (&["metrics", "--engine", "sqlite"], "unknown engine \"sqlite\""),
        (&["metrics", "--sets", "2", "--threads", "3"], "3 threads for 2 sets"),
        (&["metrics", "--threads", "0"], "at least one set and one thread"),
        (&["steady", "--interval", "0"], "positive number of seconds"),
        (&["steady", "--tx-size", "65"], "--tx-size 1 to 64"),
        (&["steady", "--structure", "tree"], "unknown structure"),
        (&["reopen", "--keys", "10", "--updates", "11"], "11 updates of 10 keys"),
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
    // PETRA durable and volatile and the two baselines, each on a row of its own, each running
    // the same transactions: the same abort rate for the transactional ones on one thread.
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    let abort = |mode: &str| -> f64 {
        let row = rows.iter().find(|r| r.get(1) == Some(&mode)).unwrap_or_else(|| panic!("no {mode} row: {text}"));
        row[6].parse().unwrap()
    };
    let (durable, volatile, locks) = (abort("durable"), abort("volatile"), abort("locks"));
    assert!(durable == volatile && volatile == locks, "{text}");
    abort("skipmap");
}

#[test]
fn the_cpp_harness_argument_form_does_the_harness_work() {
    // Set types as the C++ PETRA harness numbers them; the harness's prefill (KEY_RANGE
    // one-insert transactions: 1 - 1/e of 512 keys is 324 expected), its mixes, and every
    // transaction run counted as its time counts them.
    for (set_type, mix, mode, structure) in [
        (&["0", "40", "40"][..], "40/40/20", "durable", "list"),
        (&["1", "10", "10"], "10/10/80", "locks", "skiplist"),
        (&["2", "40", "40"], "40/40/20", "volatile", "mdlist"),
        (&["3", "40", "30", "10"], "40/30/10/20", "durable", "hashmap"),
        (&["3", "10", "10", "5"], "10/10/5/75", "locks", "hashmap"),
    ] {
        let mut args = vec!["lftt", set_type[0], "2", "300", "2", "512"];
        args.extend(&set_type[1..]);
        args.extend(["--mode", mode]);
        let out = bench(&args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap_or_default();
        assert!(first.starts_with(&format!("{structure}, key range 512, 300 transactions per thread")), "{text}");
        let present: u64 = first.split_whitespace().rev().nth(2).and_then(|n| n.parse().ok()).unwrap_or(0);
        assert!((290..=360).contains(&present), "{present} keys present after the prefill: {text}");
        assert!(text.lines().any(|l| l.starts_with(mix) && l.split_whitespace().nth(1) == Some(mode)), "{text}");
        let last = text.lines().last().unwrap_or_default();
        assert!(last.starts_with("600 transactions run in "), "{text}");
    }
}

#[test]
fn micro_runs_more_threads_than_cores_beside_the_locks() {
    // Nothing caps the threads at the cores: 8 threads (on any machine of fewer cores) run
    // PETRA and the lock-based list side by side, each thread its share.
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "micro",
        "--threads",
        "8",
        "--tx-size",
        "2",
        "--key-range",
        "256",
        "--txs",
        "200",
        "--mix",
        "10/10/80",
        "--modes",
        "durable,locks",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for mode in ["durable", "locks"] {
        let row: Vec<&str> = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|r| r.get(1) == Some(&mode))
            .unwrap_or_else(|| panic!("no {mode} row: {text}"));
        assert_eq!(row[2], "8", "{text}");
        assert!(row[4].parse::<f64>().unwrap() > 0.0, "{text}");
    }
}

#[test]
fn byte_values_add_their_blob_lines_to_the_flushes() {
    // Single updates of a full key range: every one commits and persists a one-line descriptor,
    // so word values flush 1 line per transaction and 200-byte values (a 208-byte blob: 4 or 5
    // lines) more, under the same one fence.
    let dir = tempfile::tempdir().unwrap();
    let flushes_and_fences = |value_size: &str| -> (f64, f64) {
        let out = bench(&[
            "micro",
            "--structure",
            "hashmap",
            "--threads",
            "1",
            "--tx-size",
            "1",
            "--key-range",
            "64",
            "--txs",
            "200",
            "--mix",
            "0/0/100/0",
            "--prefill",
            "1",
            "--modes",
            "durable",
            "--value-size",
            value_size,
            "--dir",
            dir.path().to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let row =
            text.lines().find(|l| l.contains("durable") && !l.contains("values")).unwrap_or_else(|| panic!("{text}"));
        let f: Vec<&str> = row.split_whitespace().collect();
        (f[7].parse().unwrap(), f[8].parse().unwrap())
    };
    assert_eq!(flushes_and_fences("0"), (1.0, 1.0));
    let (flushes, fences) = flushes_and_fences("200");
    assert_eq!(fences, 1.0);
    assert!((5.0..=6.0).contains(&flushes), "{flushes} flushes per 200-byte put");
}

#[test]
fn kv_workloads_run_in_order_on_one_store_per_engine_and_print_csv() {
    let files = tempfile::tempdir().unwrap();
    let out = bench(&[
        "kv",
        "--out",
        files.path().to_str().unwrap(),
        "--num",
        "2000",
        "--key_size",
        "20",
        "--threads",
        "2",
        "--engine",
        "sorted,unsorted,redb-none",
        "--benchmarks",
        "fillseq,readseq,readrandom,readmissing,txfillrandom,readrandomwriterandom,readwhilewriting,deleteseq,readrandom",
        "--histogram",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> =
        text.lines().skip_while(|l| !l.starts_with("engine,")).map(|l| l.split(',').collect()).collect();
    assert_eq!(
        rows[0],
        ["engine", "threads", "benchmark", "micros/op", "ops/sec", "MB/s", "found", "p50", "p99", "p99.9"]
    );
    assert_eq!(rows.len(), 1 + 3 * 9, "{text}");
    for engine in ["sorted", "unsorted", "redb-none"] {
        // (name, found): every key read back after fillseq, none of the missing ones, none after
        // deleteseq; the mixed workloads find what they find.
        let found: Vec<(&str, &str)> =
            rows[1..].iter().filter(|r| r[0] == engine && r[1] == "2").map(|r| (r[2], r[6])).collect();
        let fixed: Vec<(&str, &str)> = found
            .iter()
            .copied()
            .filter(|(n, _)| !matches!(*n, "readrandomwriterandom" | "readwhilewriting"))
            .collect();
        assert_eq!(
            fixed,
            [
                ("fillseq", "0"),
                ("readseq", "2000"),
                ("readrandom", "2000"),
                ("readmissing", "0"),
                ("txfillrandom", "0"),
                ("deleteseq", "2000"),
                ("readrandom", "0")
            ],
            "{engine}"
        );
        // Every key is present before the mixed workloads run: every read finds its key.
        let reads: Vec<u64> = rows[1..]
            .iter()
            .filter(|r| r[0] == engine && r[2] == "readwhilewriting")
            .map(|r| r[6].parse().unwrap())
            .collect();
        assert_eq!(reads, [2000], "{engine}");
    }
    // Per-operation percentiles with --histogram (readseq is one scan: none).
    let timed = rows[1..].iter().filter(|r| r[2] != "readseq");
    assert!(timed.clone().count() == 24 && timed.into_iter().all(|r| !r[7].is_empty() && !r[9].is_empty()), "{text}");
    // The files hold the printed rows: the same header, and per row the same engine, workload
    // and count found (the numbers unrounded).
    let csv = std::fs::read_to_string(files.path().join("kv.csv")).unwrap();
    let file_rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    // The files also have the 99.99th percentile and the slowest operation.
    assert_eq!(file_rows[0], [&rows[0][..], &["p99.99", "max"]].concat());
    assert_eq!(file_rows.len(), rows.len());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(files.path().join("kv.json")).unwrap()).unwrap();
    let json = json.as_array().unwrap();
    assert_eq!(json.len(), rows.len() - 1);
    for ((printed, filed), obj) in rows[1..].iter().zip(&file_rows[1..]).zip(json) {
        assert_eq!((printed[0], printed[2], printed[6]), (filed[0], filed[2], filed[6]));
        assert_eq!(obj["benchmark"].as_str().unwrap(), printed[2]);
        assert_eq!(obj["found"].as_u64().unwrap().to_string(), printed[6]);
        let (a, b) = (printed[4].parse::<f64>().unwrap(), obj["ops/sec"].as_f64().unwrap());
        assert!((a - b).abs() <= 0.5, "{a} {b}");
        // Timed workloads: the slowest operation is no faster than the 99.9th percentile.
        if printed[2] != "readseq" {
            assert!(obj["max"].as_f64().unwrap() >= obj["p99.9"].as_f64().unwrap(), "{obj}");
        }
    }
}

#[test]
fn tatp_writes_a_row_per_transaction_type_of_each_run() {
    let files = tempfile::tempdir().unwrap();
    let run = bench(&[
        "tatp",
        "--subscribers",
        "300",
        "--threads",
        "1,2",
        "--txs",
        "3000",
        "--modes",
        "durable",
        "--out",
        files.path().to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(files.path().join("tatp.json")).unwrap()).unwrap();
    let rows = json.as_array().unwrap();
    // Two runs (1 and 2 threads), each drawing all seven types over 3 000 transactions a thread.
    assert_eq!(rows.len(), 14, "{rows:?}");
    for threads in [1, 2] {
        let run: Vec<_> = rows.iter().filter(|r| r["threads"].as_u64() == Some(threads)).collect();
        let total: u64 = run.iter().map(|r| r["run"].as_u64().unwrap()).sum();
        assert_eq!(total, 3000 * threads);
        assert!(run.iter().all(|r| r["mode"] == "durable" && r["mix"] == "full" && r["subscribers"] == 300));
        let pct = |name: &str| run.iter().find(|r| r["transaction"] == name).unwrap()["success_pct"].as_f64().unwrap();
        // Reads of a subscriber that always exists always succeed; the others fall between.
        assert_eq!(pct("GET_SUBSCRIBER_DATA"), 100.0);
        assert!(run.iter().all(|r| (0.0..=100.0).contains(&r["success_pct"].as_f64().unwrap())));
    }
    let csv = std::fs::read_to_string(files.path().join("tatp.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "mode,threads,mix,subscribers,tx_per_sec,populate_secs,transaction,run,success_pct,specified_pct,implied_pct"
    );
    assert_eq!(lines.len(), 15);
    // The printed table shows the same per-type counts.
    let text = String::from_utf8_lossy(&run.stdout);
    for r in rows {
        let line = format!("{:<24} {:>10}", r["transaction"].as_str().unwrap(), r["run"].as_u64().unwrap());
        assert!(text.contains(&line), "{line} not printed:\n{text}");
    }
}

#[test]
fn micro_writes_csv_json_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let out_s = out.to_str().unwrap();
    let args = [
        "micro",
        "--threads",
        "1,2",
        "--tx-size",
        "1,2",
        "--key-range",
        "64",
        "--txs",
        "300",
        "--mix",
        "40/40/20",
        "--modes",
        "durable,locks",
        "--dir",
    ];
    let mut args: Vec<&str> = args.to_vec();
    args.extend([dir.path().to_str().unwrap(), "--out", out_s]);
    let run = bench(&args);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    // 2 thread counts x 2 sizes x 2 modes.
    let csv = std::fs::read_to_string(out.join("micro.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "structure,mix,mode,threads,tx_size,tx_per_sec,ops_per_sec,abort_pct,flushes_per_tx,fences_per_tx,prefilled"
    );
    assert_eq!(lines.len(), 9, "{csv}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("micro.json")).unwrap()).unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 8);
    // The files agree: each CSV row's tx/s is its JSON row's.
    for (line, row) in lines[1..].iter().zip(rows) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f[2], row["mode"].as_str().unwrap());
        let (a, b) = (f[5].parse::<f64>().unwrap(), row["tx_per_sec"].as_f64().unwrap());
        assert!((a - b).abs() < 0.1, "{a} {b}");
    }
    // One line per series in each plot, named in its legend.
    let threads = std::fs::read_to_string(out.join("micro-threads.svg")).unwrap();
    let sizes = std::fs::read_to_string(out.join("micro-txsize.svg")).unwrap();
    for name in ["40/40/20 size 1 durable", "40/40/20 size 2 locks"] {
        assert!(threads.contains(name), "{name} missing from the threads plot");
    }
    for name in ["40/40/20 1 thr durable", "40/40/20 2 thr locks"] {
        assert!(sizes.contains(name), "{name} missing from the size plot");
    }
}

#[test]
fn reopen_times_a_crash_open_a_clean_close_and_a_clean_open() {
    let run = bench(&["reopen", "--keys", "3000", "--updates", "500"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let text = String::from_utf8_lossy(&run.stdout);
    // A row per structure: the open after the crash read the fill's 188 descriptors (16 puts
    // each); the run itself checks that both opens found every key.
    for name in ["hashmap", "skiplist"] {
        let row: Vec<&str> = text.lines().find(|l| l.starts_with(name)).expect(name).split_whitespace().collect();
        assert_eq!(row.len(), 7, "{text}");
        assert_eq!(row[3], "188", "{text}");
        assert!(row[1..].iter().all(|f| f.parse::<f64>().is_ok()), "{text}");
    }
}

#[test]
fn metrics_runs_the_same_samples_on_the_store_and_on_redb() {
    let run = bench(&["metrics", "--samples", "300", "--reads", "50", "--ranges", "10", "--range-len", "40"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let text = String::from_utf8_lossy(&run.stdout);
    // A row per engine; each run checked its own latest reads and range lengths.
    for name in ["petra", "redb-none", "redb-immediate"] {
        let row: Vec<&str> =
            text.lines().find(|l| l.starts_with(&format!("{name} "))).expect(name).split_whitespace().collect();
        assert_eq!(row.len(), 7, "{text}");
        assert!(row[1..].iter().all(|f| f.parse::<f64>().is_ok_and(|x| x > 0.0)), "{text}");
    }
}

#[test]
fn metrics_stores_many_sets_from_many_threads() {
    // Five sets over two threads (one stores three, the other two); the run checks that every
    // set holds all its samples and that its latest is the last one, and fails otherwise.
    let args = ["metrics", "--sets", "5", "--threads", "2", "--samples", "200", "--reads", "10", "--ranges", "5"];
    let run = bench(&[&args[..], &["--range-len", "50", "--engine", "petra,redb-none"]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.starts_with("5 set(s) of 144 u64 metrics, 200 samples each, 2 thread(s)"), "{text}");
    for name in ["petra", "redb-none"] {
        let row: Vec<&str> =
            text.lines().find(|l| l.starts_with(&format!("{name} "))).expect(name).split_whitespace().collect();
        assert_eq!(row.len(), 7, "{text}");
    }
}

#[test]
fn steady_runs_checkpoint_rounds_as_it_goes_and_writes_its_rows() {
    // The default structure (a hash map), then the MDList.
    for (structure, name) in [(&[][..], "hashmap"), (&["--structure", "mdlist"][..], "mdlist")] {
        let files = tempfile::tempdir().unwrap();
        // Rings of 1 MiB: a round every 2 000 or so transactions. Under process, the rounds alone
        // recycle the rings (under periodic they also keep a second of descriptors).
        // One writer: it runs every round its ring calls for itself, and the round's end is due
        // at once (no other thread is pinned), so what follows holds however the threads are
        // scheduled. With two, a writer whose ring fills while the other runs a round (or is
        // kept off the cores pinned, so that the round's end waits) takes another ring rather
        // than wait, and the rounds give it back once they catch up: how many rings there are
        // at an interval's end, and whether a round ran in it, then depend on the scheduler.
        let args = ["steady", "--keys", "2000", "--interval", "0.3", "--intervals", "3", "--threads", "1"];
        let mut args = args.to_vec();
        args.extend(["--ring-bytes", "1048576", "--durability", "process", "--out", files.path().to_str().unwrap()]);
        args.extend(structure);
        let run = bench(&args);
        assert!(run.status.success(), "{name}: {}", String::from_utf8_lossy(&run.stderr));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(files.path().join("steady.json")).unwrap()).unwrap();
        let rows = json.as_array().unwrap();
        assert_eq!(rows.len(), 3);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(r["interval"], i);
            assert_eq!(r["structure"], name);
            // Rounds ran in every interval and folded descriptors, on the ring the writer took.
            assert!(r["rounds"].as_u64().unwrap() > 0 && r["descriptors"].as_u64().unwrap() > 0, "{r}");
            // It goes round the one ring the prefill's handle gave back.
            assert_eq!(r["rings"], 1, "{r}");
            assert!(r["node_bytes"].as_u64().unwrap() > 0, "{r}");
        }
        let end: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(files.path().join("steady-end.json")).unwrap()).unwrap();
        let end = &end[0];
        assert!((1..=2000).contains(&end["present_keys"].as_u64().unwrap()), "{name}: {end}");
        // Recovery read at most what the rings hold beyond the last round: not the whole run.
        let committed: f64 = rows.iter().map(|r| r["tx_per_sec"].as_f64().unwrap() * 0.3).sum();
        assert!((end["descriptors_read"].as_u64().unwrap() as f64) < committed / 4.0, "{name}: {end}");
        let text = String::from_utf8_lossy(&run.stdout);
        assert!(text.contains("rounds took") && text.contains("open after a crash"), "{text}");
        let header = if name == "hashmap" { "hash map of 2000 keys" } else { "MDList of 2000 keys" };
        assert!(text.starts_with(header), "{text}");
    }
}

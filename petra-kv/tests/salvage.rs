//! Salvage: a store that is refused as damaged gives up what is intact into a new file, and the
//! damaged file is never written.

use std::collections::BTreeMap;
use std::path::Path;

use petra_kv::{Config, CreateMode, KvError, Order, Store};
use rand::{Rng, SeedableRng};

fn config(path: &Path, create: CreateMode) -> Config {
    Config { create, order: Order::Sorted, size: 1 << 20, max_size: 256 << 20, ..Config::new(path) }
}

/// A closed sorted store of short and long keys, and what it holds.
fn store(path: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let store = Store::open(&config(path, CreateMode::Create)).unwrap();
    let mut s = store.session().unwrap();
    let mut model = BTreeMap::new();
    for i in 0..1500u32 {
        // Long keys each in a bucket of their own (their first 15 bytes differ), so that one
        // damaged bucket costs one key.
        let key = if i % 5 == 0 { format!("{i:05}, a key long enough for a bucket") } else { format!("k{i:05}") };
        let value: Vec<u8> = (0..rng.random_range(20..300)).map(|_| rng.random()).collect();
        s.put(key.as_bytes(), &value).unwrap();
        model.insert(key.into_bytes(), value);
    }
    drop(s);
    store.close().unwrap();
    model
}

/// Every key of `path`'s store, with its value.
fn contents(path: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let store = Store::open(&config(path, CreateMode::Open)).unwrap();
    let mut s = store.session().unwrap();
    let mut got = BTreeMap::new();
    s.get_all(|k, v| {
        got.insert(k.to_vec(), v.to_vec());
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    drop(s);
    store.close().unwrap();
    got
}

#[test]
fn a_damaged_store_gives_up_every_intact_key_and_is_never_written() {
    let dir = petra_recovery::scratch_dir();
    let (path, copy) = (dir.path().join("kv.pool"), dir.path().join("damaged.pool"));
    let model = store(&path);
    let pristine = std::fs::read(&path).unwrap();

    // An undamaged store salvages whole.
    let whole = dir.path().join("whole.pool");
    let report = petra_kv::salvage(&path, &config(&whole, CreateMode::Create)).unwrap();
    assert_eq!((report.kept as usize, report.dropped.len()), (model.len() + 2, 0), "{report:?}");
    assert_eq!(contents(&whole), model);
    assert_eq!(std::fs::read(&path).unwrap(), pristine, "salvage wrote to the file it read");

    // Flip bytes of the body until the store is refused as damaged.
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let data_off = u64::from_le_bytes(pristine[40..48].try_into().unwrap()) as usize;
    let damaged = loop {
        let mut bytes = pristine.clone();
        for _ in 0..4 {
            let at = rng.random_range(data_off..bytes.len());
            bytes[at] ^= rng.random_range(1..=255u8);
        }
        std::fs::write(&copy, &bytes).unwrap();
        match Store::open(&config(&copy, CreateMode::Open)) {
            Err(KvError::Damaged(_)) => break bytes,
            Ok(store) => drop(store), // damage in free space: opened intact
            Err(e) => panic!("refused otherwise: {e}"),
        }
        std::fs::write(&copy, &bytes).unwrap();
    };
    assert_eq!(std::fs::read(&copy).unwrap(), damaged, "a refused open wrote to the file");

    let new = dir.path().join("salvaged.pool");
    let report = petra_kv::salvage(&copy, &config(&new, CreateMode::Create)).unwrap();
    assert!(!report.dropped.is_empty(), "the damage that made the open refuse is reported");
    assert_eq!(std::fs::read(&copy).unwrap(), damaged, "salvage wrote to the damaged file");
    let got = contents(&new);
    for (k, v) in &got {
        assert_eq!(model.get(k), Some(v), "a salvaged key is not what was written: {k:?}");
    }
    let lost = model.len() - got.len();
    assert_eq!(report.kept as usize, got.len() + 2, "kept counts the store's own records too");
    // Four flipped bytes cost at most a key each (a record or a value, or a descriptor: none is
    // left after a close).
    assert!(lost <= 4, "{lost} keys lost to {} pieces of damage", report.dropped.len());
    eprintln!("salvage: {} of {} keys kept, {:?}", got.len(), model.len(), report.dropped);
}

#[test]
fn the_command_line_tool_reports_what_it_passed_over() {
    let dir = petra_recovery::scratch_dir();
    let path = dir.path().join("kv.pool");
    let model = store(&path);
    let new = dir.path().join("new.pool");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_petra-salvage")).arg(&path).arg(&new).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(&format!("{} keys kept, 0 pieces of damage passed over", model.len() + 2)), "{stdout}");
    assert_eq!(contents(&new), model);
    // A second run refuses to write over the file it made.
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_petra-salvage")).arg(&path).arg(&new).output().unwrap();
    assert!(!again.status.success());
}
